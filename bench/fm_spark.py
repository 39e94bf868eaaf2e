"""Spark MLlib's FMClassifier on a LibSVM train/test pair, one core (local[1]), for bench/fm.sh.

usage: fm_spark.py TRAIN TEST DIM FACTORS ITERATIONS STEP,REG [STEP,REG ...]

Prints one Markdown table row per (stepSize, regParam): test AUC, test log loss, seconds per
epoch (the fit's time over maxIter: with the default miniBatchFraction = 1 an iteration is one
pass over the training set) and the fit's seconds. The solver is Spark's default, adamW.
"""
import sys
import time
import warnings

warnings.filterwarnings("ignore")
from pyspark.ml.classification import FMClassifier
from pyspark.ml.functions import vector_to_array
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from sklearn.metrics import log_loss, roc_auc_score

train_path, test_path = sys.argv[1], sys.argv[2]
dim, factors, iterations = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
grid = [tuple(float(x) for x in cell.split(",")) for cell in sys.argv[6:]]
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.driver.memory", "4g").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
read = lambda p: (spark.read.format("libsvm").option("numFeatures", dim).load(p)
                  .withColumn("label", (F.col("label") > 0).cast("double")))
train, test = read(train_path).cache(), read(test_path).cache()
train.count(), test.count()
for step, reg in grid:
    fm = FMClassifier(factorSize=factors, maxIter=iterations, stepSize=step, regParam=reg,
                      tol=0.0, seed=1)
    start = time.perf_counter()
    model = fm.fit(train)
    fit = time.perf_counter() - start
    scored = (model.transform(test).select("label", vector_to_array("probability")[1].alias("p"))
              .toPandas())
    print(f"| Spark FMClassifier k = {factors}, stepSize {step:g}, regParam {reg:g}, "
          f"{iterations} iterations | {roc_auc_score(scored.label, scored.p):.4f} "
          f"| {log_loss(scored.label, scored.p):.4f} | {fit / iterations:.3f} | {fit:.1f} |",
          flush=True)
spark.stop()
