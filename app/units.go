package app

import "strings"

// costUnits writes an amount of cost units for people, with the noun in
// the singular for exactly one: "1 cost unit", "2.5 cost units",
// "0 cost units", "0.0123 cost units" (costText's four significant
// digits).
func costUnits(c float64) string { return amountOf(costText(c), "cost units") }

// amountOf writes a number already formatted and its plural noun,
// singular when the number reads "1": "1 cost unit", "3 cost units".
func amountOf(number, nouns string) string {
	if number == "1" {
		return "1 " + strings.TrimSuffix(nouns, "s")
	}
	return number + " " + nouns
}
