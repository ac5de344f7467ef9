"""Structured output: the tokens a JSON schema or a grammar allows next (no ROS, no engine)."""

from .constraint import Constraint, ConstraintError, OutputFormat, Vocabulary
from .output import check_output, compile_constraint

__all__ = ['check_output', 'compile_constraint', 'Constraint', 'ConstraintError', 'OutputFormat',
           'Vocabulary']
