"""The rmq-broker daemon: Trio server, request processors, CLI, configuration and client stub."""

__version__ = "0.1.0"
