"""The search, one module per step (planner.search.plan_search calls them in order):

- request, settings: what the user asks, and how the solver runs;
- contexts: the cost context of each phase's machine;
- budget: what a deployment may use, and what one instance weighs;
- table_cache: cost tables kept across searches;
- candidate_spaces: which instance sizes and layouts are candidates, costed;
- deployment: structures, roles, offers, objectives: the deployment question's vocabulary;
- instance_counts: how many instances of each role serve a rate or give the most per weight;
- enumerate_deployments: every deployment ranked exactly (the CP-SAT model's oracle and start,
  the runner-ups, the feasibility check);
- cpsat_model: the CP-SAT model that proves the best deployment;
- plan_files: chosen deployments as scored, validated plan files (validate: the validator);
- alternatives: runner-ups and the best plan of each other structure;
- diagnose, nearest: why nothing is feasible, and the nearest point that is;
- plan_search: the orchestrator; sweep: many searches sharing tables;
- oracle: exhaustive enumerators the tests check the search against.
"""
