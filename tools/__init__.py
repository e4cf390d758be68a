"""Tools for working on haclient (not part of any distribution)."""
