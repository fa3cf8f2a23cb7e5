"""Django-free sources. Each source is a fetch_*() that does the I/O and a pure
parse_*() that turns the reply into frozen dataclasses (collectors.records)."""
