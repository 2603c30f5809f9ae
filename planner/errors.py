"""Errors a user can cause. The CLI prints their message and exits with their exit code.

`BadInputError` (exit 2): a file, a flag or a plan that is wrong; the message names the field
and the fix. `InfeasibleError` (exit 1): the request is well formed but nothing satisfies it; the
message names the constraint that binds.
"""


class PlannerError(Exception):
    """Base of every error moeplan reports to a user instead of a traceback."""

    exit_code = 2


class BadInputError(PlannerError):
    """The input is malformed or breaks a rule; exit code 2."""

    exit_code = 2


class InfeasibleError(PlannerError):
    """The input is valid but no deployment satisfies the constraints; exit code 1."""

    exit_code = 1
