"""The yardstick: a plain Django project, as `django-admin startproject` makes it, with one
JSON view. bench/yardstick.py serves it on the standard servers; the project's figures are
ratios to the best of them."""
