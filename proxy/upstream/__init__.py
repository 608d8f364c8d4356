"""Talking to SGLang: the upstream client and the embedded engine that speaks the same protocol."""
