"""What builds the documentation site (mkdocs.yml's `hooks:`): pages generated from the code."""
