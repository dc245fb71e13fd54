"""Helpers the tests share: fake CLIs and providers, real local servers (stub, LangSmith), Chromium, fixtures."""
