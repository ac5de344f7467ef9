"""Structured output: the tokens a JSON schema or a grammar allows next (no ROS, no engine)."""

from .constraint import (compile_constraint, Constraint, ConstraintError, OutputFormat,
                         Vocabulary)

__all__ = ['compile_constraint', 'Constraint', 'ConstraintError', 'OutputFormat', 'Vocabulary']
