"""The one exception type for problems with the user's input.

Library functions raise `NanobertError` for anything a user can fix (a missing file, an empty corpus, an
unknown preset, a corrupt checkpoint). The CLI catches it, prints its message as one line and exits with 2,
so users never see a traceback for their own mistakes. Bugs stay ordinary exceptions.
"""


class NanobertError(Exception):
    """A problem with the user's input; the message says what is wrong and what to do."""
