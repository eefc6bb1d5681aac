"""The Textual app. It sees the other layers only through readings and events."""
