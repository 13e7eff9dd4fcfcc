"""Constrained policy optimisation with projected policies (filled in by the RL issue)."""
