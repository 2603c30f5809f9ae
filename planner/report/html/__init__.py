"""The HTML report (`--html FILE` of plan, evaluate and sweep): one self-contained page.

The page shows what the terminal says and what it cannot: the question asked and the answer in
one sentence, the ranked plans with every layout written out, the cluster drawn device by device
(coloured by instance and role), the expert layer's placement, where a step's time and a
device's HBM go, how sure each figure is (bands, the lead of rank 1, the fidelity rows of the
machine), the command that reproduces it, and the `plan --json` document embedded in
`<script type="application/json" id="moeplan-plans">` so that `moeplan evaluate report.html
--rank N` reads the plans back.

Self-contained: styles, the small sorting script and every picture (inline SVG) are in the file;
it makes no network request and reads without JavaScript. Modules: `pages` assembles a page per
command from the search's and the cost model's public results; `plans_table`, `cluster`,
`experts`, `charts` and `sureness` build its parts; `render` fills the Jinja2 template in
`templates/`. Jinja2 and matplotlib are imported only when a page is written.
"""

from planner.report.html.pages import (
    EvaluatePage,
    PlanPage,
    SweepPage,
    evaluate_html,
    plan_html,
    sweep_html,
)

__all__ = ["EvaluatePage", "PlanPage", "SweepPage", "evaluate_html", "plan_html", "sweep_html"]
