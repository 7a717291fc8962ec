"""Request processors, registered by request code."""
