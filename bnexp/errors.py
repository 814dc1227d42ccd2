"""User-facing errors.

A :class:`UserError` is a problem with the user's input (a config value, a data
folder, an output folder). The CLI prints its message as one paragraph and exits
with code 2, without a traceback. Any other exception is an internal error and
keeps its traceback.
"""


class UserError(Exception):
    """An error caused by the user's input; its message says what to change."""


class ConfigError(UserError):
    """A config value is out of its allowed range.

    Args:
        key: the dotted config key, e.g. ``trainer.batch_size``.
        value: the offending value.
        allowed: what is allowed, in words.
    """

    def __init__(self, key: str, value: object, allowed: str):
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"invalid config value {key}={value!r}: {allowed}.")


class DataError(UserError):
    """A dataset is missing, truncated, corrupt or fails its checksum."""
