"""What runs are worth: the compute ledger (accounting), the μ/γ theory, the study's arithmetic and the reports.
Pure numbers over metrics; nothing here starts a role."""
