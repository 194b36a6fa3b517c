"""The web UI's start form: `layout` groups and labels our options (and maps the names the page
mangles back to them), `validation` refuses a bad value before Locust starts the run. Layout's
listener is registered first, so validation reads the form with its names restored."""
