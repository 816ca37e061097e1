"""Converters: source recordings into rayform segments."""
