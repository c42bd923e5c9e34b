"""``report.html``, the readable page of a job's releases and budget, in plain HTML and CSS.

:func:`render_report` builds the page from a release document (:mod:`beam_dp.report.page`); the
panels are :mod:`beam_dp.report.panels` (numbers, labels, budget) and :mod:`beam_dp.report.cdf`
(the private CDF), and :mod:`beam_dp.report.formatting` holds the one rule for printing numbers
(also the jobs' summary table's) and the style sheet. Everything on the page is released or
public; the report reads no record, so it sits outside the Beam layer and the readers (``io``).
"""

from beam_dp.report.page import render_report

__all__ = ["render_report"]
