package idle

import (
	"context"
	"fmt"
	"strings"

	"github.com/shirou/gopsutil/v4/sensors"
)

// sensorThermal is a ThermalSource over gopsutil's sensors: on Linux the
// hwmon temp*_input files (or thermal_zone*/temp where no hwmon exists), on
// Windows WMI's MSAcpi_ThermalZoneTemperature (which needs administrator
// rights on most machines). It reports the hottest CPU or chassis sensor
// (see cpuSensor); GPUs come from NVML, disks and network cards are left
// out.
type sensorThermal struct{}

var _ ThermalSource = sensorThermal{}

// MaxTemperatureC implements ThermalSource.
func (sensorThermal) MaxTemperatureC(ctx context.Context) (float64, string, error) {
	stats, err := sensors.TemperaturesWithContext(ctx)
	// gopsutil returns the sensors it could read with a *Warnings error for
	// those it could not: use what was read.
	if len(stats) == 0 && err != nil {
		return 0, "", fmt.Errorf("temperature: %w", err)
	}
	return maxCPUTemperature(stats)
}

// cpuSensorPrefixes are hwmon driver names (and thermal zone types) of CPU
// packages, cores and the ACPI chassis zone, as gopsutil keys them
// ("coretemp_package_id_0", "k10temp_tctl", "acpitz", "x86_pkg_temp").
var cpuSensorPrefixes = []string{
	"coretemp", "k10temp", "zenpower", "cpu", "acpitz", "x86_pkg_temp",
	"soc_thermal", "thinkpad", "dell_smm", "applesmc", "tz", `\_tz`,
}

// cpuSensor reports whether a sensor key names a CPU or chassis sensor.
func cpuSensor(key string) bool {
	k := strings.ToLower(key)
	for _, p := range cpuSensorPrefixes {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return strings.Contains(k, "package") || strings.Contains(k, "cpu")
}

// maxCPUTemperature picks the hottest plausible CPU or chassis sensor.
// Readings at or below 0 °C or above 150 °C are sensor faults and ignored.
func maxCPUTemperature(stats []sensors.TemperatureStat) (float64, string, error) {
	best, key := 0.0, ""
	for _, s := range stats {
		if !cpuSensor(s.SensorKey) || s.Temperature <= 0 || s.Temperature > 150 {
			continue
		}
		if key == "" || s.Temperature > best {
			best, key = s.Temperature, s.SensorKey
		}
	}
	if key == "" {
		return 0, "", fmt.Errorf("temperature: no CPU sensor among %d: %w", len(stats), ErrNoSource)
	}
	return best, key, nil
}
