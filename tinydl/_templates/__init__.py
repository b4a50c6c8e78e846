"""Kernel templates compiled by Jinja2 when the wheel is built (tinydl/backends/templating.py);
empty in a source checkout, where templates are compiled at first use."""
