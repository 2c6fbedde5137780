// Command kfold is an idlepool job program for k-fold cross-validation of
// two classifiers, Gaussian naive Bayes and 5-nearest neighbours, on a CSV
// data set: one header line, numeric feature columns, and an integer class
// label in the last column.
//
// Task params (from the kfold split rule): k, fold, rows, shuffle and
// permutation_seed. Row i belongs to the fold given by
// fold.Assign(rows, k, shuffle, permutation_seed); the task trains on every
// row outside its fold and tests on the rows inside it. Input "data" is the
// CSV. Result:
//
//	{"fold": 2, "test_rows": 30, "gaussian_nb_correct": 28, "knn5_correct": 28}
//
// A problem in the data (a cell that is not a number, a record with too few
// fields, a row count other than params.rows) exits with status 65
// (task.ExitData), so that idlepool's hint points at the data.
//
// The classifiers follow the specification in shared/datasets/README.md,
// which scikit-learn 1.2.1 reproduces; see gaussianNB and knn. The program is
// built for WASI (GOOS=wasip1 GOARCH=wasm) and runs natively too.
package main

import (
	"errors"
	"fmt"
	"os"

	"idlepool/examples/internal/task"
	"idlepool/job/fold"
)

// params are the task parameters this program reads.
type params struct {
	K               int    `json:"k"`                // number of folds
	Fold            *int   `json:"fold"`             // the fold tested, 0..k-1
	Rows            int    `json:"rows"`             // data rows, header not counted
	Shuffle         bool   `json:"shuffle"`          // permute rows before folding
	PermutationSeed uint64 `json:"permutation_seed"` // the permutation's seed
}

// result is the task result.
type result struct {
	Fold              int `json:"fold"`                // the fold tested
	TestRows          int `json:"test_rows"`           // rows in the fold
	GaussianNBCorrect int `json:"gaussian_nb_correct"` // rows naive Bayes got right
	KNN5Correct       int `json:"knn5_correct"`        // rows 5-NN got right
}

func main() {
	os.Exit(task.Run(os.Stdin, os.Stdout, os.Stderr, compute))
}

// compute runs one task.
func compute(t task.Task) (any, error) {
	var p params
	if err := t.DecodeParams(&p); err != nil {
		return nil, err
	}
	if p.Fold == nil {
		return nil, errors.New("params.fold is missing")
	}
	path, err := t.Input("data")
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open data: %w", err)
	}
	defer f.Close()
	ds, err := readDataset(f)
	if err != nil {
		return nil, task.DataError(fmt.Errorf("read data: %w", err))
	}
	if p.Rows != len(ds.Y) {
		return nil, task.DataError(fmt.Errorf("params.rows is %d but the data has %d CSV records after the header: "+
			"the split counted rows in another way (is split.format = \"lines\" set for a CSV file?)", p.Rows, len(ds.Y)))
	}
	folds, err := fold.Assign(p.Rows, p.K, p.Shuffle, p.PermutationSeed)
	if err != nil {
		return nil, err
	}
	if *p.Fold < 0 || *p.Fold >= p.K {
		return nil, fmt.Errorf("params.fold must be in [0, %d), got %d", p.K, *p.Fold)
	}
	return evaluate(ds, folds, *p.Fold), nil
}

// evaluate trains both classifiers on the rows whose fold is not f and
// counts how many rows of fold f each classifies correctly.
func evaluate(ds dataset, folds []int, f int) result {
	var train, test dataset
	for i, row := range ds.X {
		if folds[i] == f {
			test.X = append(test.X, row)
			test.Y = append(test.Y, ds.Y[i])
		} else {
			train.X = append(train.X, row)
			train.Y = append(train.Y, ds.Y[i])
		}
	}
	res := result{Fold: f, TestRows: len(test.Y)}
	nb := fitGaussianNB(train)
	for i, x := range test.X {
		if nb.predict(x) == test.Y[i] {
			res.GaussianNBCorrect++
		}
		if knn(train, x, 5) == test.Y[i] {
			res.KNN5Correct++
		}
	}
	return res
}
