"""Fake outside systems for demo mode and tests, kept apart from the product.

`fakes.kube` is a fake Kubernetes API server (Leases, LeaseCandidates) and `fakes.nks` a fake
NKS API with its identity service. Both speak real HTTP and serve only what the real APIs
serve. No product module imports this package; only `setup_demo` does, to register them.
"""
