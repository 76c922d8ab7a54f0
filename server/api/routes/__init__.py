"""HTTP routes: thin functions that validate, call one service function, and reply."""
