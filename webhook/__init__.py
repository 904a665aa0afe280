"""The mutating admission webhook: the decision (pure) and its aiohttp adapter."""
