"""A throw-away OpenID provider (django-oidc-provider) that tests run as their own process."""
