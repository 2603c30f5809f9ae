"""Redundant-expert placement: which logical expert sits in which slot of which device."""
