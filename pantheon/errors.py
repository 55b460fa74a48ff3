"""Typed errors of the engine: every refusal names the offending value."""


class PantheonError(Exception):
    """Base of every error Pantheon raises on purpose."""


class GGUFError(PantheonError, ValueError):
    """A GGUF file is malformed, hostile or unsupported; nothing was loaded."""


class BadMagic(GGUFError):
    """The file does not start with the GGUF magic."""


class UnsupportedVersion(GGUFError):
    """The GGUF version is not one we read (2 or 3)."""


class TruncatedFile(GGUFError):
    """The file ends before the data its header promises."""


class AbsurdValue(GGUFError):
    """A count, offset, length or shape is out of any sane bound."""


class UnsupportedTensorType(GGUFError):
    """A tensor uses a ggml type that Pantheon has no kernel for."""


class MissingKey(GGUFError):
    """A metadata key the architecture needs is absent."""


class MissingTensor(GGUFError):
    """A tensor the architecture needs is absent."""


class ShapeMismatch(GGUFError):
    """A tensor's shape disagrees with the metadata."""


class UnsupportedArchitecture(GGUFError):
    """`general.architecture` names a model family Pantheon cannot run."""


class EngineError(PantheonError):
    """A request to the engine is invalid (unknown id, context overflow, bad parameters)."""


class ContextOverflow(EngineError):
    """A sequence would exceed the context the engine was given."""


class TemplateError(PantheonError):
    """A chat template failed to compile or render, or rejected the conversation it was given."""


class InvalidParameter(EngineError):
    """A sampling or request parameter is out of range; the message and `field` name it."""

    def __init__(self, message, field=None):
        super().__init__(message)
        self.field = field


class UsageError(PantheonError):
    """A command-line flag or environment variable is malformed, out of range, or names what does not exist."""


class UnsupportedDevice(PantheonError):
    """A die of a kind the engine cannot run on (GPU dies: no GPU engine yet)."""
