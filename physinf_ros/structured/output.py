"""
A request's output format made into a grammar: a JSON schema, a Lark grammar or a tool call.

check_output refuses what cannot be used (with the reason, before anything is decoded);
compile_constraint gives one reply its Constraint.
"""

from functools import lru_cache
from typing import Optional

from . import tools
from .constraint import (Constraint, ConstraintError, JSON_OPTIONS, json_schema, OutputFormat,
                         Vocabulary)


# A request reads its format's tools for its prompt, its grammar and its tool calls: the JSON is
# parsed once (the format is frozen, and nothing changes the functions made of it).
@lru_cache(maxsize=64)
def check_output(output: OutputFormat) -> tuple:
    """Return (functions, tool_choice) of an output format; ConstraintError if it is bad."""
    functions = tools.parse_tools(output.tools)
    choice = tools.check_tool_choice(output.tool_choice, functions)
    asked = [name for name, value in (('response_format', output.response_format),
                                      ('grammar', output.grammar)) if value.strip()]
    if functions and choice != 'none':
        asked.append('tools')
    if len(asked) > 1:
        raise ConstraintError(f'give one of {" or ".join(asked)}, not both')
    return functions, choice


def grammar_text(output: OutputFormat, functions: tuple, choice: str,
                 chat_template: Optional[str] = None) -> str:
    """
    Return llguidance's grammar for a constrained output format; ConstraintError if it has none.

    functions and choice: what check_output made of its tools.
    """
    import llguidance
    if choice not in ('auto', 'none'):
        return tools.call_grammar(functions, choice, tools.call_format(chat_template))
    if output.grammar.strip():
        try:
            return llguidance.LLMatcher.grammar_from_lark(output.grammar)
        except ValueError as exc:
            raise ConstraintError(f'grammar does not compile: {exc}') from None
    schema = json_schema(output.response_format)
    try:
        return llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_OPTIONS)
    except ValueError as exc:
        raise ConstraintError(f'JSON schema does not compile: {exc}') from None


def compile_constraint(vocabulary: Vocabulary, output: OutputFormat,
                       chat_template: Optional[str] = None) -> Optional[Constraint]:
    """Return a fresh Constraint for one reply (None: free text); ConstraintError if bad."""
    functions, choice = check_output(output)
    if not output.constrained:
        return None
    return Constraint(vocabulary, grammar_text(output, functions, choice, chat_template))
