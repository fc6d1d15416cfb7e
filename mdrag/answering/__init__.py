"""Answering: results in, answer events out.

:mod:`~mdrag.answering.ask` plans an answer (retrieve, refuse, or answer) over
a small retriever protocol; :mod:`~mdrag.answering.generate` writes it: the
prompt with numbered sources, streamed from an OpenAI-compatible LLM, or an
extractive answer without one.
"""
