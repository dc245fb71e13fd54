"""The model layer: the registry that turns ``provider:model`` specs into chat models, the embedded model, retries, rate
limits and the response cache."""

from models import builtin_providers  # noqa: F401 - the built-in providers register themselves as it is imported
