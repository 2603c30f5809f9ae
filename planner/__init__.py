"""moeplan: a deployment planner for large mixture-of-experts models on Huawei Ascend clusters.

Data flows one way through the package, and imports follow it:
specs -> placement -> costmodel -> candidates -> search -> ranking -> report -> cli.
"""

__version__ = "0.1.0"
