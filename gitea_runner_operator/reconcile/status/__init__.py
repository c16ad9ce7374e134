"""A group's status, pure: its conditions, the parts other code notes for it, and the one
composition of the whole status that the status writer sends."""
