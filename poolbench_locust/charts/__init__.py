"""Charts of a run: the pooling figures over time and a sweep's knee, as inline SVG, in the web UI's
Pooling tab (live, on the master), in the HTML report, beside PREFIX_sweep.csv and from
`poolbench-plot PREFIX` after the fact."""
