"""Performer reproductions (Figs 2 and 4): see ``rfkit reproduce --list``."""

REPRODUCTIONS: list = []
