"""kappalab: a verification-first numerical lab for *Model Immunization from a Condition Number Perspective*."""
