"""dressage-proxy: the trajectory-recording inference proxy (the I/O shell around ``statemachines``)."""
