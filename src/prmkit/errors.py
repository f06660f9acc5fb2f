"""The one exception type for problems the user can fix (bad config, bad data, missing files).

The CLI prints these as a short message and exits non-zero; anything else is a bug and keeps its traceback.
"""


class PRMError(ValueError):
    """A user-fixable problem; the message says what is wrong, the value, and the fix."""
