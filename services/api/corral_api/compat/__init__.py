"""Compatibility surfaces: adapters that speak another project's wire protocol and translate
it to Corral's own services (one folder each)."""
