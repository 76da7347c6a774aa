"""The PyTorch + PEFT engine: serves docs/engine-protocol.md over standard input and output."""

ENGINE_NAME = "tinker-engine-torch"
ENGINE_VERSION = "0.1.0"
PROTOCOL_VERSIONS = (1, 2)
