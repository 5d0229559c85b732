"""Page presenters: one module per alerts page, turning queries into rows to render."""
