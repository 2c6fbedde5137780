package app

import "strings"

// costUnits writes an amount of cost units for people, with the noun in
// the singular for exactly one: "1 cost unit", "2.5 cost units",
// "0 cost units", "0.0123 cost units" (costText's four significant
// digits).
func costUnits(c float64) string { return amountOf(costText(c), "cost units") }

// What a cost unit is, for people: the history window's note (long) and
// the job details' (short). The cost of a task is the job's own: its
// manifest's task_cost (1 by default), times a numeric parameter of the
// task when the job names one (cost_param, such as the task's samples),
// derived by the planner from the job alone (job.Job.Cost), never from
// time or from what a machine reports.
const (
	costUnitMeans = "A cost unit is what a job declares one of its tasks to be worth: 1 per task, unless the job weighs its tasks " +
		"(by their number of samples, say). The pool's planner derives it from the job alone, the same for every machine: " +
		"never from the time a task took or from what a machine reports. It is not money."
	costUnitShort = "the worth the job declares for a task, the same on every machine, never time"
)

// amountOf writes a number already formatted and its plural noun,
// singular when the number reads "1": "1 cost unit", "3 cost units".
func amountOf(number, nouns string) string {
	if number == "1" {
		return "1 " + strings.TrimSuffix(nouns, "s")
	}
	return number + " " + nouns
}
