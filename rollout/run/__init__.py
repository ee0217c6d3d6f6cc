"""The run: config, identity, dataset, the gateway process, Ray workers, resume, and the driver that ties them."""
