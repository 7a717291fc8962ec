"""The rmq-broker daemon: Trio server, request processors, CLI, configuration and client stub."""

from pipeline.package import use_project_packages

__version__ = "0.1.0"

# `python -m broker` puts the working directory first on sys.path, and a store directory there is
# usually named `store`: import the real packages before anything reaches for them.
use_project_packages()
