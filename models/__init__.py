"""The model layer: the registry that turns ``provider:model`` specs into chat models, the embedded model, retries, rate
limits and the response cache."""
