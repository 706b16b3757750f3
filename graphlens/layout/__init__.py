"""The Qt-free layout engine behind the graph canvas.

:mod:`graphlens.layout.view` decides what is drawn (node boxes, collapsed scope groups, graph
inputs and outputs, edges); :mod:`graphlens.layout.layered` decides where. The GUI only paints
the result, so layouts can be computed, tested and benchmarked without a display.
"""
