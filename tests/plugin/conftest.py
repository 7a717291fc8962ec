"""The plugin's tests run pytest on sample projects: pytester provides the temp dir and runs."""

pytest_plugins = ["pytester"]
