"""The view layer (Qt-free): for each view of the app (the table in views.py) and each figure of the headless
report, the inputs it depends on and the arrays it draws; each module's docstring says what it holds.

The app's views read the session, call these functions in a worker, and draw the result; `report.py`
calls the same functions, so both show the same numbers.
"""
