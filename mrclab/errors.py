"""The three ways a command can fail, each with its own exit code (docs/spec.md)."""


class MrclabError(Exception):
    exit_code = 1


class ExpectationFailed(MrclabError):
    """An expectation or a verification did not hold."""

    exit_code = 1


class UsageError(MrclabError):
    """Bad input: the message names the file, the key and what is allowed."""

    exit_code = 2


class EnvironmentNotReady(MrclabError):
    """The machine cannot run a lab; the message names the failing `mrclab check` row."""

    exit_code = 3


class Terminated(BaseException):
    """SIGTERM/SIGHUP during a run: unwinds like Ctrl-C so every teardown runs; the message is the signal's name."""
