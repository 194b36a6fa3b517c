"""The web UI's start form: `layout` groups and labels our options (and maps the names the page
mangles back to them), `secrets` keeps the secret fields' values out of the page, `validation`
refuses a bad value before Locust starts the run. Layout's listener is registered first, so the
others read the form with its names restored; the secrets are put back before it is checked."""
