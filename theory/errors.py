"""The one exception class for user mistakes, shared by every package of shufflefl.

Library code raises :class:`InputError` for input a user can fix (a fraction outside [0, 1], a negative
variance, a missing file); each command-line ``main`` catches it once, prints one line and exits with 2.
It subclasses :class:`ValueError` so that callers who only know the standard library can still catch it.
"""


class InputError(ValueError):
    """Invalid user input; the message names the offending argument."""
