"""Serving engines (vLLM-Ascend, SGLang, MindIE): capability profiles read from data files."""
