"""Where the pages' images are: beside docs/ on GitHub, inside the site once built (docsgen/hooks.py)."""

IMAGES_ON_GITHUB = "](../bench/results/"
"""How a page links an image of bench/results/: the path from docs/, so that GitHub shows it."""
IMAGES_IN_SITE = "](bench/results/"
"""The same link in the site, where the hook serves bench/results/ at the site's root."""
