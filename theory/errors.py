"""The one exception class for user mistakes, shared by every package of shufflefl.

Library code raises :class:`InputError` for input a user can fix (a fraction outside [0, 1], a negative
variance, a missing file); each command-line ``main`` catches it once, prints one line and exits with 2.
It subclasses :class:`ValueError` so that callers who only know the standard library can still catch it.
"""


class InputError(ValueError):
    """Invalid user input; the message names the offending argument."""


# A user's own code (fl.plugins registers each plug-in module's files as it imports them): file -> plug-in path
USER_CODE: dict[str, str] = {}


def register_user_code(files, spec: str) -> None:
    """Mark ``files`` (paths) as plug-in ``spec``'s code, so that its failures are told as its own."""
    import os

    for file in files:
        USER_CODE[os.path.realpath(str(file))] = spec


def user_code_failure(error: BaseException) -> str | None:
    """One line for an exception a plug-in's code raised (the innermost frame of its traceback, or of an exception it
    was raised from, that lies in a registered file): the plug-in, the function and line, the exception; None where
    no plug-in code is in the traceback."""
    import os
    import traceback

    seen = 0
    while error is not None and seen < 5:
        frames = [f for f in traceback.extract_tb(error.__traceback__) if os.path.realpath(f.filename) in USER_CODE]
        if frames:
            frame = frames[-1]
            text = " ".join(str(error).split())[:300] or "(no message)"
            spec = USER_CODE[os.path.realpath(frame.filename)]
            where = f"{os.path.basename(frame.filename)}:{frame.lineno}"
            return f"plug-in {spec} failed in {frame.name} ({where}): {type(error).__name__}: {text}"
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None
