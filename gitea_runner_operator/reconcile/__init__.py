"""Deciding (pure functions over plain data) and acting (the reconciler that applies them)."""
