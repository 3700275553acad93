"""The Atropos paper reproduction: experiments, the LINEITEM page stores, TPC-H-like traces, plots."""
