"""Test helpers shared by the core, the plugins and third parties.

- `graphs`: tiny graph-IR modules built in code (the conformance suite's reference graphs);
- `zoo`: reference models in torch, with seeded weights;
- `numerics`: how results are compared with a reference;
- `devices`: whether a (target, device) pair can run here, and why not;
- `differential`: seeded random models compiled for several targets and checked against float64
  (`python -m retarget.testing.differential`);
- `conformance`: the conformance suite, run with
  `pytest --pyargs retarget.testing --retarget-plugin NAME` (options from `pytest_plugin`).
"""
